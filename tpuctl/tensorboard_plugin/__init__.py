"""The tpuctl tab in TensorBoard (issue 37): a dynamic plugin, found by TensorBoard through the `tensorboard_plugins`
entry point, that lists the runs whose model dir is under the logdir (`finding`: the view.json files the launcher
publishes into MODEL_DIR/tpuctl/<run_id>/, on disk or in a bucket), serves each view after checking every field
(`checking`: the files are shared and never trusted) and draws it in the browser (`static/`: an ES module that
builds SVG from text nodes only). TensorBoard imports `plugin` as it starts, so nothing here imports TensorFlow,
and the storage client is imported only when a gs:// logdir is listed."""
