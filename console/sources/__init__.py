"""Fleet-wide figures from systems that already collect them (Prometheus + DCGM-exporter)."""
