import os

# Before torch allocates anything: torch's CPU allocator advises each block of 2 MB or more to transparent huge
# pages, so a step's large temporaries (a hierarchical softmax's gathered classes, a gradient over 1M words) fault
# in 2 MB at a time instead of 4 KB (measured at 1M words: the hierarchical softmax's step 1.6x faster;
# docs/bench.md). The same arithmetic, bit for bit; a value the user set is kept (0 turns it off).
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

from .cli import main  # noqa: E402 (after the allocator's setting)

raise SystemExit(main())
