"""feedline.format (under construction)."""
