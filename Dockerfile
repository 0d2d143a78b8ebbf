# vlm-serve on the CPU build of PaddlePaddle. Build: docker build -t vlm-serve .
# Run:   docker run -p 8000:8000 -v /path/to/checkpoint:/model vlm-serve serve /model --host 0.0.0.0
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    NUMBA_CACHE_DIR=/home/vlm/.cache/numba \
    VLM_SERVER_CACHE=/home/vlm/.cache/vlm-serve

RUN apt-get update \
    && apt-get install -y --no-install-recommends libgomp1 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --create-home --uid 1000 vlm

WORKDIR /app
COPY pyproject.toml README.md ./
COPY vlm_server vlm_server
COPY vision vision
COPY encoder_cache encoder_cache
COPY scheduler scheduler
COPY runner runner
COPY maca_kernels maca_kernels
COPY benchmarks benchmarks
RUN pip install . && mkdir -p /home/vlm/.cache && chown -R vlm /home/vlm

USER vlm
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=120s --retries=3 \
    CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=4)"
ENTRYPOINT ["vlm-server"]
# Without a model the server creates and serves a random test model (its answers are noise).
CMD ["serve", "--host", "0.0.0.0", "--port", "8000"]
