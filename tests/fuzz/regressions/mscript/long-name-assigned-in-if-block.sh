#!/bin/bash
# fuzz regression (mscript): a variable name of 150 characters, over the
# 100 that a skipped block notes, assigned inside an if block
if [ -n "$DEBUG" ]; then
    LONG_NAME_XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX=1
fi
