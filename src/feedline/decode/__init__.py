"""feedline.decode (under construction)."""
