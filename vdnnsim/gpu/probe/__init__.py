"""Model probes: a model run op by op (ATen, on the meta device or a GPU) or layer by layer (torch.fx) to learn its tensors, saved activations and ops."""
