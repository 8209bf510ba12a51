"""Helpers of the fault-injection suite (tests/faults): see tests/faults/README.md."""
