"""Ships the shared-brain rules template (``shared_brain_rules.md``) that ``palacectl rules`` renders."""
