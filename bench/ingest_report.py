"""bench/ingest.py's tables, one per comparison, and its last line: one JSON object with the headline numbers."""

from __future__ import annotations

import json
from typing import Any

from ingest_mixed import print_mixed
from ingest_real_vllm import AGENT_TOKENS
from ingest_scaling import print_scaling

Results = dict[tuple[str, bool, int], dict[str, float]]
"""wrk's figures by setup, streamed or not, and connections."""


def report(
    results: Results,
    paced: dict[str, dict[str, float]],
    scaling: list[dict[str, float]],
    mixed: list[dict[str, Any]],
    overhead: dict[str, Any],
) -> None:
    at32 = {s: results[s, False, 32] for s in ("direct", "parity", "litellm")}
    after = results["parity_after", False, 32]
    # Latency ingest adds over direct, saturated and paced, for the table and the JSON alike.
    added = {
        "parity": at32["parity"]["p50_ms"] - at32["direct"]["p50_ms"],
        "parity_paced": paced["parity"]["p50_ms"] - paced["direct"]["p50_ms"],
        "parity_after": after["p50_ms"] - at32["direct"]["p50_ms"],
        "parity_after_paced": paced["parity_after"]["p50_ms"] - paced["direct"]["p50_ms"],
    }
    print_proxies(results)
    protocol_ratios = print_protocols(results)
    security_ratios = print_security(results)
    print_scaling(scaling)
    print_mixed(mixed)
    print(
        f"paced, 32 connections, non-stream: direct {paced['direct']['rps']:,.0f} req/s p50 "
        f"{paced['direct']['p50_ms']:.2f} ms; parity {paced['parity']['rps']:,.0f} req/s p50 "
        f"{paced['parity']['p50_ms']:.2f} ms (added {added['parity_paced']:.2f} ms)"
    )
    print(
        f"durability 'after', 32 connections, non-stream: {after['rps']:,.0f} req/s p50 {after['p50_ms']:.2f} ms "
        f"(added {added['parity_after']:.2f} ms); paced p50 {paced['parity_after']['p50_ms']:.2f} ms "
        f"(added {added['parity_after_paced']:.2f} ms)"
    )
    print_real_vllm(overhead)
    errors = {
        f"{s}/{'stream' if st else 'json'}/{c}": r["errors"]
        for (s, st, c), r in results.items()
        if r["errors"]
    }
    if errors:
        print(f"non-2xx or timed-out responses: {errors}")
    print(json.dumps({
        "parity_rps": round(at32["parity"]["rps"]), "litellm_rps": round(at32["litellm"]["rps"]),
        "direct_rps": round(at32["direct"]["rps"]),
        "parity_added_p50_ms": round(added["parity"], 2),
        "parity_added_p50_ms_paced": round(added["parity_paced"], 2),
        "parity_after_rps": round(after["rps"]),
        "parity_after_added_p50_ms": round(added["parity_after"], 2),
        "parity_after_added_p50_ms_paced": round(added["parity_after_paced"], 2),
        "parity_vs_litellm": round(at32["parity"]["rps"] / max(at32["litellm"]["rps"], 1e-9), 1),
        "mixed_rps": round(mixed[0]["rps"]),
        "ingest_scaling": {str(row["ingests"]): {"rps_vs_one": round(row["rps"] / scaling[0]["rps"], 2),
                                                 "cpu_ms_per_call": round(row["cpu_ms_per_call"], 2)} for row in scaling},
        "vllm_overhead_pct": round(overhead["overhead_pct"], 2),
        "vllm_capture_params_pct": round(overhead["vllm_capture_params_pct"], 2),
        "vllm_proxy_overhead_pct": round(overhead["proxy_overhead_pct"], 2),
        "vllm_messages_overhead_pct": round(overhead["messages_overhead_pct"], 2),
        **protocol_ratios,
        **security_ratios,
    }))  # fmt: skip


def print_proxies(results: Results) -> None:
    """Direct, through ingest and through LiteLLM's proxy, side by side."""
    print(f"{'mode':<11}{'conns':>6} | {'direct rps':>11}{'p50 ms':>8} | {'parity rps':>11}{'p50 ms':>8}{'p99 ms':>8}"
          f"{'+p50 ms':>9} | {'litellm rps':>12}{'p50 ms':>9} | {'parity/litellm':>15}")  # fmt: skip
    for stream in (False, True):
        for connections in (1, 32, 256):
            d, p, lt = (results[s, stream, connections] for s in ("direct", "parity", "litellm"))
            print(f"{'stream' if stream else 'non-stream':<11}{connections:>6} | {d['rps']:>11,.0f}{d['p50_ms']:>8.2f} | "
                  f"{p['rps']:>11,.0f}{p['p50_ms']:>8.2f}{p['p99_ms']:>8.2f}{p['p50_ms'] - d['p50_ms']:>9.2f} | "
                  f"{lt['rps']:>12,.0f}{lt['p50_ms']:>9.1f} | {p['rps'] / max(lt['rps'], 1e-9):>14.1f}x")  # fmt: skip


def print_protocols(results: Results) -> dict[str, float]:
    """/v1/messages and /v1/responses against chat on the same ingest; returns the worst ratios for the JSON."""
    print(
        f"\n{'protocol':<11}{'mode':<11}{'conns':>6} | {'parity rps':>11}{'p50 ms':>8}{'p99 ms':>8} | {'vs chat rps':>12}"
    )
    for protocol in ("messages", "responses"):
        for stream in (False, True):
            for connections in (1, 32, 256):
                p, chat = (
                    results[f"parity_{protocol}", stream, connections],
                    results["parity", stream, connections],
                )
                print(f"{protocol:<11}{'stream' if stream else 'non-stream':<11}{connections:>6} | {p['rps']:>11,.0f}"
                      f"{p['p50_ms']:>8.2f}{p['p99_ms']:>8.2f} | {p['rps'] / max(chat['rps'], 1e-9):>11.2f}x")  # fmt: skip
    protocol_ratios = {
        f"{protocol}_vs_chat_rps": round(min(
            results[f"parity_{protocol}", stream, c]["rps"] / max(results["parity", stream, c]["rps"], 1e-9)
            for stream in (False, True) for c in (32, 256)), 2)
        for protocol in ("messages", "responses")
    }  # fmt: skip
    print(
        f"translation keeps at worst {protocol_ratios['messages_vs_chat_rps']:.2f}x (messages) and "
        f"{protocol_ratios['responses_vs_chat_rps']:.2f}x (responses) of chat's throughput at 32 and 256 connections\n"
    )
    return protocol_ratios


def print_security(results: Results) -> dict[str, float]:
    """Tokens, then TLS too, against the plain ingest run beside them; returns the ratios for the JSON."""
    print(f"{'security':<11}{'mode':<11}{'conns':>6} | {'plain rps':>10}{'p50 ms':>8} | {'secured rps':>12}{'p50 ms':>8}"
          f" | {'vs plain rps':>13}")  # fmt: skip
    security_ratios = {}
    for label in ("auth", "tls"):
        for stream in (False, True):
            plain, secured_row = (
                results[f"parity_plain_{label}", stream, 32],
                results[f"parity_{label}", stream, 32],
            )
            ratio = secured_row["rps"] / max(plain["rps"], 1e-9)
            security_ratios[f"{label}_{'stream' if stream else 'json'}_vs_plain_rps"] = round(
                ratio, 2
            )
            print(f"{label:<11}{'stream' if stream else 'non-stream':<11}{32:>6} | {plain['rps']:>10,.0f}"
                  f"{plain['p50_ms']:>8.2f} | {secured_row['rps']:>12,.0f}{secured_row['p50_ms']:>8.2f} | {ratio:>12.2f}x")  # fmt: skip
    print(
        "auth: tokens checked by ingest (the agent's key) and the store (ingest's service token); "
        "tls: the same, with ingest's HTTPS and both gRPC ports on TLS\n"
    )
    return security_ratios


def print_real_vllm(overhead: dict[str, Any]) -> None:
    times = overhead["seconds"]
    print(
        f"real vLLM, {overhead['rounds']} rounds; each runs three groups of {overhead['agents']} agents side by side, "
        f"{overhead['turns']} calls of {AGENT_TOKENS} tokens per agent ({overhead['placement']})"
    )
    print(
        f"  median seconds per agent: direct {times['direct']:.2f}, direct asking for token ids and logprobs "
        f"{times['direct_capture_params']:.2f}, through ingest {times['parity']:.2f}"
    )
    print(
        f"  capture overhead {overhead['overhead_pct']:+.1f}%: vLLM producing token ids and logprobs "
        f"{overhead['vllm_capture_params_pct']:+.1f}%, the proxy {overhead['proxy_overhead_pct']:+.1f}% "
        "(medians of the rounds' ratios)"
    )
    per_token = overhead["messages_seconds_per_token"]
    print(
        f"  /v1/messages, the same agents side by side: vLLM's own {per_token['direct'] * 1000:.2f} ms per output "
        f"token, through ingest {per_token['parity'] * 1000:.2f} ms: capture overhead {overhead['messages_overhead_pct']:+.1f}%"
    )
