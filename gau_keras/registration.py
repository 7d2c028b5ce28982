"""The package name that every gau_keras Keras object (layer, initializer, optimizer,
schedule, loss, model class) is registered under: ``"gau_keras>ClassName"`` in a
``.keras`` file's config."""

PACKAGE = "gau_keras"
