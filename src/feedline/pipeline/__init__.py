"""feedline.pipeline (under construction)."""
