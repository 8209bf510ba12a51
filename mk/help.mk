# SPDX-License-Identifier: Apache-2.0
# make help: every target and variable with its one line, read from the `## ` comments (mk/help.awk).

.PHONY: help
help: ## this list: every target with one line, then the variables
	@awk -f mk/help.awk $(MAKEFILE_LIST)
