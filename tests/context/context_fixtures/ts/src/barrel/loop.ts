export * from './index'
