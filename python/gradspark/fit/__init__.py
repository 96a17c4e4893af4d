"""A linear fit's path, decided once: the plan (:mod:`~gradspark.fit.plan`), the rules across
Params it checks (:mod:`~gradspark.fit.rules`) and its execution (:mod:`~gradspark.fit.execute`)."""
