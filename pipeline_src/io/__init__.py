"""What every stage stands on: errors, atomic writes, reading artifacts, content digests, where every file
lives (``paths``), the process's runtime (device, threads, seeds, signals) and the guard that keeps every step off
committed files (``tracked``). Imports no other stage."""
