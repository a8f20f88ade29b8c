"""The LoCoMo harness behind `langmem-trpc bench locomo`: QA arms and the offline
retrieval evaluation. It stays out of the installed package (the wheel holds only
`langmem_trpc`); docs/bench-locomo.md describes the runs and their figures."""
