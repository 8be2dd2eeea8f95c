"""LLM-proposed PTX edits: the chat-completions client (``client``) and what builds on it.

Everything here is optional: ``openai`` is imported, and the API key read, only when an
LLM call is actually made, so evo runs without either when ``[llm] rate = 0``.
"""
