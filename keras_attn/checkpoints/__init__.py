"""Pretrained weights made elsewhere, read into our models: Hugging Face folders (`huggingface`)."""
