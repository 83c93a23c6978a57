"""Where the statistics pass runs: in memory, streamed from files (local), or on Dask."""
