"""Infrastructure every part uses and that names no part."""
