"""Calibration: `vdnnsim calibrate`'s microbenchmarks of kernels, ops and the CPU optimizer step."""
