"""msit's dumps: the torch hook's (``torch_dump``) and ATB's, driven by ``msit llm dump`` (``atb_dump``)."""

from tui_acc.dumps.msit import atb_dump, torch_dump  # noqa: F401  (importing a reader registers it)
