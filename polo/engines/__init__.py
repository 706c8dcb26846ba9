"""Engines (stage ``engine``): a policy and task examples → scored rollouts; registered in ``ENGINES``, whose
lookup imports every module of this folder. Also the pieces engines share: the KV-cache sampler, vLLM generation,
the multi-turn episode record and its row views."""
