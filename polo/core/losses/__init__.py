"""Policy losses (registered in ``POLICY_LOSSES``), the critic loss and the entropy of a policy."""
from polo.core.losses.base import LossOutput, PolicyLoss, clipped_surrogate, ratio
from polo.core.losses.cispo import CISPO
from polo.core.losses.entropy import entropy_from_logits
from polo.core.losses.gspo import GSPO
from polo.core.losses.ppo_clip import PPOClip
from polo.core.losses.reinforce import Reinforce
from polo.core.losses.value import clipped_value_loss

__all__ = [
    "CISPO", "GSPO", "LossOutput", "PPOClip", "PolicyLoss", "Reinforce", "clipped_surrogate",
    "clipped_value_loss", "entropy_from_logits", "ratio",
]
