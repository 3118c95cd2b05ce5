"""Cost models: what an op, a layer or an optimizer step costs on a GPU and its host (the analytic model, the calibrated kernel and op models, the CPU step), and the fits of their constants."""
