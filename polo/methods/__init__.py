"""Method folders: ``polo/methods/NAME/`` holds everything particular to one published method that spans more
than one stage (its estimator or loss, its engine, its input providers, its outer loop), discovered by every
registry like a stage folder (docs/pipeline.md, "Where a method lives")."""
