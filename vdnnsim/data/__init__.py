"""Data files: GPU presets (gpus.yaml)."""
