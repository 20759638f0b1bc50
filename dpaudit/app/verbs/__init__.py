"""One module per ``dpaudit`` verb; each defines ``register(subparsers)``."""
