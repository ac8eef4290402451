"""The attention family: out = softmax(q kᵀ · scale) v, flash-attention style (plans.py: problem, choice, plan;
operator.py: AttentionFloat / AttentionDouble)."""
