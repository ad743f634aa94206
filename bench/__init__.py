"""Benchmarks: hartflow side by side with LangChain ``create_agent``, Deep Agents on Temporal and the Temporal floor.

``python -m bench`` runs every family on one freshly started dev server and prints a markdown table (see
``bench/__main__.py``). The peers come from the ``bench`` extra (``pip install -e '.[bench]'``); nothing in the
runtime packages imports this one.
"""
