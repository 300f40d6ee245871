"""msit's dumps: the torch hook's (``torch_dump``) and ATB's, driven by ``msit llm dump`` (``atb_dump``)."""
