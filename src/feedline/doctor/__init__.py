"""feedline.doctor (under construction)."""
