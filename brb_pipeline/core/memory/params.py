"""The distilled memory's parameters (apart from the generator, so that reading settings imports
no mlx-lm)."""

#: Generation cap per prompt (the ``llm_max_tokens`` setting).
MAX_TOKENS = 512
#: Message text per prompt; a longer month is cut into windows (the ``memory_window_chars`` setting).
WINDOW_CHARS = 6000
