"""The copy engine: plan what each target lacks, copy it, verify it. Pure orchestration over RegistryClient."""
