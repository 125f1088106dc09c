# frozen_string_literal: true
# `require "timeout"` with bindings/ruby/lib on the load path
# (`ruby -I bindings/ruby/lib app.rb`): Ruby's Timeout on tmo's engines.
require "tmo/timeout"
