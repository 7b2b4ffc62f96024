// SPDX-License-Identifier: MIT
/// \file
/// The CPU backend: every family's cells of the dispatch table (core/dispatch.hpp). The
/// entry points (forms/) include this header; a new family's folder adds its line here.
#pragma once

#include "element_types.hpp"
#include "linear/algorithms.hpp"
#include "linear/backward/algorithms.hpp"
#include "linear/householder_product.hpp"
#include "mlstm/algorithms.hpp"
#include "selective_scan/algorithms.hpp"
#include "rls/algorithms.hpp"
#include "softmax/algorithms.hpp"
#include "ttt/algorithms.hpp"
