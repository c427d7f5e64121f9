"""The trajectory assembler (samples and training batches)."""
