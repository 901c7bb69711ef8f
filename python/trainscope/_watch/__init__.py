"""run.watch()'s parts, one idea a file (docs/architecture.md, "The watcher"). Imported
through trainscope.watch, the facade whose names the rest of trainscope and the tests use
(and patch): importing a part first imports the facade, so every part sees it whole."""

import trainscope.watch  # noqa: F401  (first: the parts look names up on it)
