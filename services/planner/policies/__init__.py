"""Policy backends: an OpenAI-compatible endpoint, a local transformers model, and a script for tests."""
