"""What measures the product, in one place: judged questions and evaluation runs (`models`),
their datasets, the evaluation and its scores, the playground, staff review of real turns
(`review`) and the admin pages of all of it (`admin`).

It reads conversations and drives retrieval; neither imports it (import-linter contracts in
pyproject.toml). A Django app of its own, label `quality`.
"""
