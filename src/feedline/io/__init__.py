"""feedline.io (under construction)."""
