"""The review page (`invoice-pipeline review-ui`): an adapter over the engine's review functions.

The engine never imports this package.
"""
