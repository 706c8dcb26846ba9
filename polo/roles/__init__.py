"""Model roles (stage ``roles``): the models besides the policy that a run may need (reference, critics, judge,
teacher, history, ...); registered in ``ROLES``, whose lookup imports every module of this folder."""
