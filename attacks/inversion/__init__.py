"""Model-inversion attacks (MI-Face; see ``reference/attacks.md`` §2)."""
