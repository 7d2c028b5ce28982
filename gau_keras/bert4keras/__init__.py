"""The Keras 2 face that bert4keras-era code expects, on top of the core (layers, models,
Backbones: plain Keras 3) and of Keras 3, neither of which it patches.

* ``model``: ``Keras2Mixin``, Keras 2's calls on a Keras 3 model (``fit_generator`` and
  friends, nested Python lists, ``y_true`` cast to the output's dtype, saving under any file
  name, on JAX the metrics of the CRF / MEMM / Loss layers); ``build_transformer_model``
  returns its model with it (``keras2``), and ``Model``, the ``keras.models.Model`` of
  ``gau_keras.backend``, has it.
* ``saving``: whole-model files under bert4keras-era names.
* ``nodes``: ``get_output_at`` and its kin on bert4keras's layer names (the layer classes of
  ``gau_keras.layers``), given when this face is imported.
* ``keras2``: the ``keras`` namespace ``gau_keras.backend`` hands out: Keras 3
  with the Keras 2 names added (``keras.models.Model`` is ``model.Model``,
  ``keras.losses.kullback_leibler_divergence``, ``keras.activations.get`` with
  ``set_gelu``'s 'gelu', ...).
* ``keras2_backend``: that namespace's ``backend`` (``K``), Keras 2's backend
  functions on ``keras.ops``.
* ``jax_training``: on JAX, ``Loss.add_metric`` and metrics that read weights
  (MEMM), for the face's models (their steps, ``compute_loss`` and ``compute_metrics``).

Importing gau_keras changes nothing in Keras: ``keras.Model``, ``keras.layers.Layer`` and
Keras's activation and serialization tables stay the objects they were, also after every
gau_keras layer and model was built and trained (tests/bert4keras/test_face.py); a plain
``keras.Model`` has Keras 3's semantics.
What Keras 3 cannot do at all (a replaced ``train_function``, ``K.gradients``
outside a traced function, ``K.set_learning_phase``) raises an error that
names the README's porting section (``PORTING``).
"""

#: where the README tells what replaces a Keras 2 call that has no Keras 3 form
PORTING = "README.md, 'Porting from bert4keras'"
