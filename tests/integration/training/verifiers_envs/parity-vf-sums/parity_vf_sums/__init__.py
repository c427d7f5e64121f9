from parity_vf_sums.taskset import SumsTaskset

__all__ = ["SumsTaskset"]
