"""Input providers (stage ``inputs``): the extra inputs components declare, computed once per step; registered in
``PROVIDERS``, whose lookup imports every module of this folder."""
