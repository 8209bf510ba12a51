# SPDX-License-Identifier: Apache-2.0
"""Helpers of the fault-injection suite (tests/faults): see tests/faults/README.md."""
