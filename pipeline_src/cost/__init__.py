"""What a head costs: the head benchmark (forward and backward per head and vocabulary size) and the training
step benchmark against a plain PyTorch peer."""
