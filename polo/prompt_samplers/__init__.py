"""Prompt samplers (stage ``prompt_sampler``): which prompts are rolled out and which groups are kept; registered in
``PROMPT_SAMPLERS``, whose lookup imports every module of this folder."""
