"""Information-consistent GRPO: the paraphrase-group prompt sampler, the ``word_entropy`` input and the
consistency shaping."""
