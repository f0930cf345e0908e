"""The learner: trains the Conductor policy with GRPO (TRL) on rewards from the rollout subject (docs/learner.md)."""
