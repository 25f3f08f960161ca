"""What every stage stands on: errors, atomic writes, reading artifacts, content digests, where every file
lives (``paths``) and the process's runtime (device, threads, seeds, signals). Imports no other stage."""
