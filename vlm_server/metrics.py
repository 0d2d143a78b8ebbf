"""Prometheus text exposition of the engine's state and request timings (no dependency)."""

from __future__ import annotations

import threading
from bisect import bisect_left

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Histogram:
    def __init__(self, name: str, help_text: str) -> None:
        self.name, self.help = name, help_text
        self.counts = [0] * (len(BUCKETS) + 1)
        self.total = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(BUCKETS, value)] += 1
        self.total += value
        self.count += 1

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} histogram"]
        cumulative = 0
        for bound, count in zip(BUCKETS, self.counts, strict=False):
            cumulative += count
            lines.append(f'{self.name}_bucket{{le="{bound}"}} {cumulative}')
        lines.append(f'{self.name}_bucket{{le="+Inf"}} {self.count}')
        lines += [f"{self.name}_sum {self.total}", f"{self.name}_count {self.count}"]
        return lines


class ServerMetrics:
    """Request timings observed by the API, plus gauges read from the engine on scrape."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ttft = Histogram("vlm_time_to_first_token_seconds", "Time to first token.")
        self.tpot = Histogram("vlm_time_per_output_token_seconds", "Time per output token.")
        self.e2e = Histogram("vlm_e2e_request_latency_seconds", "Request latency.")
        self.preprocess = Histogram("vlm_preprocess_seconds", "Tokenization and media ingestion.")
        self.requests = {"ok": 0, "error": 0}

    def observe_request(self, output) -> None:
        metrics = output.metrics
        with self.lock:
            self.requests["ok" if output.error is None else "error"] += 1
            if metrics.ttft is not None:
                self.ttft.observe(metrics.ttft)
                tokens = len(output.outputs[0].token_ids)
                if tokens > 1:
                    decode = metrics.finished_time - metrics.first_token_time
                    self.tpot.observe(decode / (tokens - 1))
            self.e2e.observe(metrics.finished_time - metrics.arrival_time)

    def render(self, engine) -> str:
        gauges = engine.scheduler.metrics()
        cache = engine.ingestor.cache.stats()
        lines = []
        for key, value in sorted(gauges.items()):
            kind = (
                "gauge"
                if key in ("num_running", "num_waiting", "kv_usage") or "rate" in key
                else "counter"
            )
            name = f"vlm_{key}" + ("_total" if kind == "counter" else "")
            lines += [f"# TYPE {name} {kind}", f"{name} {float(value)}"]
        lines += [
            "# TYPE vlm_processor_cache_hit_rate gauge",
            f"vlm_processor_cache_hit_rate {cache.hit_rate}",
            "# TYPE vlm_processor_cache_bytes gauge",
            f"vlm_processor_cache_bytes {cache.bytes_used}",
        ]
        with self.lock:
            for status, count in self.requests.items():
                lines.append(f'vlm_requests_total{{status="{status}"}} {count}')
            for histogram in (self.ttft, self.tpot, self.e2e, self.preprocess):
                lines += histogram.render()
        return "\n".join(lines) + "\n"
