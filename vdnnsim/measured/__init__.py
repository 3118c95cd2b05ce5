"""The measured side without torch: torch.profiler traces and memory snapshots read, measurement records, and predictions judged against them."""
