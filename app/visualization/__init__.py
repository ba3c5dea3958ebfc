"""Pictures of a trained model: the attention weights of one sentence collected and drawn
as heatmaps (`attention`), and the training curves of a run's metrics.jsonl (`curves`);
where a picture may be written (`output`). `python -m app.pictures` is the command that
calls them.

Plotting needs matplotlib, imported only inside the drawing functions, so importing this
package imports neither matplotlib nor TensorFlow.
"""
