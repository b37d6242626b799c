"""Training: encoders, objectives (BSL), the training loop and evaluation."""
