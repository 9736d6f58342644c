// --load-plugin imports a file (or a module) whose registered passes and pipelines
// become usable in -p; a broken plugin is named in a clean error.
// RUN: llm-opt %s --load-plugin %S/Inputs/plugin_passes.py -p test-prefix-functions \
// RUN:   | filecheck %s
// RUN: llm-opt %s --load-plugin=%S/Inputs/plugin_passes.py -p 'test-prefix-functions{prefix=my_}' \
// RUN:   | filecheck %s --check-prefix=OPTION
// RUN: env PYTHONPATH=%S/Inputs llm-opt %s --load-plugin plugin_passes -p test-prefix-functions \
// RUN:   | filecheck %s
// RUN: llm-opt %s --load-plugin %S/Inputs/plugin_passes.py -p 'test-cleanup{prefix=c_}' \
// RUN:   --dump-pass-pipeline 2>&1 | filecheck %s --check-prefix=PIPELINE
// RUN: not llm-opt %s -p test-prefix-functions 2>&1 | filecheck %s --check-prefix=NOPLUGIN
// RUN: not llm-opt %s --load-plugin %S/Inputs/broken_plugin.py 2>&1 \
// RUN:   | filecheck %s --check-prefix=BROKEN
// RUN: not llm-opt %s --load-plugin %S/Inputs/no_such_plugin.py 2>&1 \
// RUN:   | filecheck %s --check-prefix=MISSING
// RUN: not llm-opt %s --load-plugin no_such_plugin_module 2>&1 \
// RUN:   | filecheck %s --check-prefix=NOMODULE

func.func @f() {
  func.return
}

// CHECK: func.func @plugin_f()

// OPTION: func.func @my_f()

// PIPELINE: // Pass pipeline: canonicalize,test-prefix-functions{prefix=c_},cse
// PIPELINE: func.func @c_f()

// NOPLUGIN: llm-opt: error: unknown pass 'test-prefix-functions'

// BROKEN:      llm-opt: error: failed to load plugin '{{.*}}broken_plugin.py': KeyError: 'missing-setting'
// BROKEN-NEXT:   at {{.*}}broken_plugin.py:10: return SETTINGS["missing-setting"]
// BROKEN-NOT:  Traceback

// MISSING: llm-opt: error: failed to load plugin '{{.*}}no_such_plugin.py': no such file

// NOMODULE: llm-opt: error: failed to load plugin 'no_such_plugin_module': no module named 'no_such_plugin_module'
